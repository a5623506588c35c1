{%- import "kernel.j2" as kernel with context -%}
{%- import "cpp_names.j2" as cpp with context -%}
{%- set ctype = {'FP32': 'float', 'FP16': 'uint16_t', 'INT32': 'int32_t', 'INT64': 'int64_t'}.get(cookiecutter.dtype) -%}
// CUDA side of the "{{ cookiecutter.backend_name }}" backend: the computation for
// KIND_GPU instances.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace triton { namespace backend { namespace {{ cookiecutter.backend_name }} {
{% if kernel.add_sub %}
// Queues {{ cookiecutter.output0_name }} = {{ cookiecutter.input0_name }} + {{ cookiecutter.input1_name }} and {{ cookiecutter.output1_name }} = {{ cookiecutter.input0_name }} - {{ cookiecutter.input1_name }} over 'count'
// elements of device memory on 'stream'; returns the launch status.
{%- if cookiecutter.dtype == 'FP16' %}
// Elements are IEEE 754 binary16 bit patterns (__half in device code).
{%- endif %}
{{ cpp.call(0, 'cudaError_t LaunchAddSub', ['const ' ~ ctype ~ '* input0', 'const ' ~ ctype ~ '* input1', ctype ~ '* output0', ctype ~ '* output1', 'size_t count', 'cudaStream_t stream']) }}
{%- else %}
// None yet: see kernels.cu.
{%- endif %}

}}}  // namespace triton::backend::{{ cookiecutter.backend_name }}
