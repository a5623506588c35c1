{%- import "kernel.j2" as kernel with context -%}
{%- import "cpp_names.j2" as cpp with context -%}
{%- if kernel.add_sub -%}
{#- The element type of the host's pointers, and of the device code (FP16 as __half). -#}
{%- set ctype, device_type = {'FP32': ('float', 'float'), 'FP16': ('uint16_t', '__half'), 'INT32': ('int32_t', 'int32_t'), 'INT64': ('int64_t', 'int64_t')}[cookiecutter.dtype] -%}
{{ '#include <cuda_fp16.h>\n\n' if device_type == '__half' else '' }}#include <algorithm>

#include "kernels.h"

namespace triton { namespace backend { namespace {{ cookiecutter.backend_name }} {

//
// ============================ YOUR LOGIC (GPU) ==============================
// One grid-stride loop over the elements; keep it in step with
// Compute() in src/compute.cc, which serves KIND_CPU instances.
//
__global__ void
{{ cpp.call(0, 'AddSubKernel', ['const ' ~ device_type ~ '* __restrict__ input0', 'const ' ~ device_type ~ '* __restrict__ input1', device_type ~ '* __restrict__ output0', device_type ~ '* __restrict__ output1', 'const size_t count'], '') }}
{
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
{%- if device_type == '__half' %}
    // Computed in float and rounded once, like the CPU path.
    const float a = __half2float(input0[i]);
    const float b = __half2float(input1[i]);
    output0[i] = __float2half(a + b);
    output1[i] = __float2half(a - b);
{%- else %}
    output0[i] = input0[i] + input1[i];
    output1[i] = input0[i] - input1[i];
{%- endif %}
  }
}
// ============================================================================

cudaError_t
{{ cpp.call(0, 'LaunchAddSub', ['const ' ~ ctype ~ '* input0', 'const ' ~ ctype ~ '* input1', ctype ~ '* output0', ctype ~ '* output1', 'const size_t count', 'cudaStream_t stream'], '') }}
{
  if (count == 0) {
    return cudaSuccess;
  }
  constexpr size_t kThreads = 256;
  constexpr size_t kMaxBlocks = 4096;  // the grid-stride loop covers the rest
  const size_t blocks = std::min((count + kThreads - 1) / kThreads, kMaxBlocks);
{{ cpp.call(2, 'AddSubKernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>',
    ['reinterpret_cast<const __half*>(input0)', 'reinterpret_cast<const __half*>(input1)',
     'reinterpret_cast<__half*>(output0)', 'reinterpret_cast<__half*>(output1)', 'count']
    if device_type == '__half' else ['input0', 'input1', 'output0', 'output1', 'count']) }}
  return cudaGetLastError();
}

}}}  // namespace triton::backend::{{ cookiecutter.backend_name }}
{%- else -%}
// CUDA side of the "{{ cookiecutter.backend_name }}" backend.
//
// This model has no CUDA kernel yet: KIND_GPU instances gather their inputs
// into host memory and run Compute(), like KIND_CPU instances. Write kernels
// here, declare them in kernels.h, and launch them from
// src/{{ cookiecutter.backend_name }}.cc on the instance's stream (CudaStream()), as the
// template's add/sub example does.
#include "kernels.h"
{%- endif %}
