{%- set ctype = {'FP32': 'float', 'FP16': 'uint16_t', 'INT32': 'int32_t', 'INT64': 'int64_t'}[cookiecutter.dtype] -%}
{%- set device_type = {'FP32': 'float', 'FP16': '__half', 'INT32': 'int32_t', 'INT64': 'int64_t'}[cookiecutter.dtype] -%}
#include "kernels.h"
{%- if cookiecutter.dtype == 'FP16' %}

#include <cuda_fp16.h>
{%- endif %}

#include <algorithm>

namespace triton { namespace backend { namespace {{ cookiecutter.backend_name }} {

//
// ============================ YOUR LOGIC (GPU) ==============================
// One grid-stride loop over the elements; keep it in step with AddSub() in
// {{ cookiecutter.backend_name }}.cc, which serves KIND_CPU instances.
//
__global__ void
AddSubKernel(
    const {{ device_type }}* __restrict__ input0, const {{ device_type }}* __restrict__ input1,
    {{ device_type }}* __restrict__ output0, {{ device_type }}* __restrict__ output1, const size_t count)
{
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
{%- if cookiecutter.dtype == 'FP16' %}
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
LaunchAddSub(
    const {{ ctype }}* input0, const {{ ctype }}* input1, {{ ctype }}* output0,
    {{ ctype }}* output1, const size_t count, cudaStream_t stream)
{
  if (count == 0) {
    return cudaSuccess;
  }
  constexpr size_t kThreads = 256;
  constexpr size_t kMaxBlocks = 4096;  // the grid-stride loop covers the rest
  const size_t blocks = std::min((count + kThreads - 1) / kThreads, kMaxBlocks);
  AddSubKernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(
{%- if cookiecutter.dtype == 'FP16' %}
      reinterpret_cast<const __half*>(input0),
      reinterpret_cast<const __half*>(input1),
      reinterpret_cast<__half*>(output0), reinterpret_cast<__half*>(output1),
      count);
{%- else %}
      input0, input1, output0, output1, count);
{%- endif %}
  return cudaGetLastError();
}

}}}  // namespace triton::backend::{{ cookiecutter.backend_name }}
