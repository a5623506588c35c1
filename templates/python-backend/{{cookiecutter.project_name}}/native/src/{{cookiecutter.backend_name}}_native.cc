{%- set c = cookiecutter -%}
{%- set module = c.backend_name ~ '_native' -%}
{#- The extension serves these four dtypes; the file is rendered (then removed) without native too. -#}
{%- set cpp = {'FP32': 'float', 'FP16': 'uint16_t', 'INT32': 'int32_t', 'INT64': 'int64_t'}.get(c.dtype, 'float') -%}
{%- set np_type = {'FP32': 'float32', 'FP16': 'float16', 'INT32': 'int32', 'INT64': 'int64'}.get(c.dtype, 'float32') -%}
// {{ module }}: the hot loop of {{ 'backend "' ~ c.backend_name ~ '"' if c.python_based_backend else 'model "' ~ c.model_name ~ '"' }}, as a Python extension module.
//
// model.py calls add_sub(in0, in1) -> (out0, out1) on the {{ c.dtype }} arrays of a request (or of a
// whole batch) and falls back to numpy when this module is not built. Put your own element-wise logic
// in ComputeElement(); for logic that is not element-wise, rewrite the loop in AddSub().

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
{%- if c.dtype == 'FP16' %}
#include <cstring>
{%- endif %}
#include <string>
#include <vector>

namespace py = pybind11;

namespace {{ c.backend_name }} {
namespace {

constexpr const char* kDtypeName = "{{ np_type }}";  // numpy name of the {{ c.dtype }} tensors

{%- if c.dtype == 'FP16' %}

// FP16 tensors hold IEEE 754 binary16 bit patterns. The arithmetic runs in float and rounds back to
// the nearest half (ties to even), as numpy does for float16.
using Element = uint16_t;
using Compute = float;

Compute ToCompute(Element half)
{
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // infinity or NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal: normalise the mantissa
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

Element FromCompute(Compute value)
{
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN stays a (quiet) NaN
    return sign | 0x7e00u;
  }
  if (magnitude >= 0x477ff000u) {  // 65520 and above round to infinity
    return sign | 0x7c00u;
  }
  if (magnitude >= 0x38800000u) {  // a normal half: rebias, round the 13 dropped bits to even
    const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (magnitude < 0x33000000u) {  // below half the smallest subnormal: zero
    return sign;
  }
  // A subnormal half: shift the full float mantissa into place, round to even.
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - (magnitude >> 23);
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) {
    ++half;
  }
  return sign | static_cast<uint16_t>(half);
}
{%- else %}

using Element = {{ cpp }};
using Compute = {{ cpp }};

inline Compute ToCompute(Element value) { return value; }
inline Element FromCompute(Compute value) { return value; }
{%- endif %}

// ---- Your computation: one element of each output from one element of each input. --------------
inline void
ComputeElement(Compute in0, Compute in1, Compute* out0, Compute* out1)
{
  *out0 = in0 + in1;
  *out1 = in0 - in1;
}
// -------------------------------------------------------------------------------------------------

void
CheckArray(const py::array& array, const char* name)
{
  if (!array.dtype().equal(py::dtype(kDtypeName))) {
    throw py::type_error(
        std::string(name) + " must be a " + kDtypeName + " array, got " +
        py::str(array.dtype()).cast<std::string>());
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + " must be C-contiguous");
  }
}

py::tuple
AddSub(const py::array& in0, const py::array& in1)
{
  CheckArray(in0, "in0");
  CheckArray(in1, "in1");
  if (in0.ndim() != in1.ndim() ||
      !std::equal(in0.shape(), in0.shape() + in0.ndim(), in1.shape())) {
    throw py::value_error("in0 and in1 must have the same shape");
  }

  const std::vector<py::ssize_t> shape(in0.shape(), in0.shape() + in0.ndim());
  py::array out0(in0.dtype(), shape);
  py::array out1(in0.dtype(), shape);
  const auto* a = static_cast<const Element*>(in0.data());
  const auto* b = static_cast<const Element*>(in1.data());
  auto* sum = static_cast<Element*>(out0.mutable_data());
  auto* difference = static_cast<Element*>(out1.mutable_data());
  const py::ssize_t count = in0.size();
  {
    py::gil_scoped_release no_gil;  // the loop touches no Python object
    for (py::ssize_t i = 0; i < count; ++i) {
      Compute first, second;
      ComputeElement(ToCompute(a[i]), ToCompute(b[i]), &first, &second);
      sum[i] = FromCompute(first);
      difference[i] = FromCompute(second);
    }
  }
  return py::make_tuple(out0, out1);
}

}  // namespace
}  // namespace {{ c.backend_name }}

PYBIND11_MODULE({{ module }}, m)
{
  m.doc() = "Hot loop of the {{ c.backend_name }} backend: element-wise add/sub over {{ np_type }} arrays.";
  m.attr("DTYPE") = {{ c.backend_name }}::kDtypeName;
  m.def(
      "add_sub", &{{ c.backend_name }}::AddSub, py::arg("in0"), py::arg("in1"),
      "Return (in0 + in1, in0 - in1) for two C-contiguous {{ np_type }} arrays of equal shape.");
}
