{%- import "native_names.j2" as native with context -%}
{%- set c = cookiecutter -%}{% set module = native.module -%}{% set np_type = native.np_type -%}{% set owner = native.owner -%}
{%- import "generated_header.j2" as generated with context %}{{ generated.header("//", "native/src/compute.cc") }}
//
// {{ module }}: the Python extension module (pybind11) that compute.py of {{ owner }} imports.
// add_sub(in0, in1) checks the arrays compute.py passes ({{ np_type }}, C-contiguous, of one shape), allocates
// the outputs and runs your hot loop, AddSub in native/src/compute.cc, with Python's GIL released, so
// that other Python threads of the stub run meanwhile.

// pybind11: C++ bindings for Python (its CMake package comes with `pip install pybind11`); numpy.h adds
// py::array, a handle on a numpy array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "elements.h"  // Element, kDtypeName and your AddSub

namespace py = pybind11;

namespace {{ c.backend_name }} {
namespace {

// A TypeError unless `array` holds kDtypeName elements, a ValueError unless it is C-contiguous (the
// loop walks its buffer element by element); pybind11 raises them in Python as those exceptions.
// py::array is a handle on a numpy array: its dtype, flags, shape and data pointer.
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

// add_sub(in0, in1) -> (out0, out1): what Python calls, with the GIL held.
py::tuple
AddSubArrays(const py::array& in0, const py::array& in1)
{
  CheckArray(in0, "in0");
  CheckArray(in1, "in1");
  // The same number of dimensions and the same size in each: the loop pairs elements by position.
  if (in0.ndim() != in1.ndim() ||
      !std::equal(in0.shape(), in0.shape() + in0.ndim(), in1.shape())) {
    throw py::value_error("in0 and in1 must have the same shape");
  }

  // The outputs: new numpy arrays (owned by Python once returned) of the inputs' shape and dtype.
  const std::vector<py::ssize_t> shape(in0.shape(), in0.shape() + in0.ndim());
  py::array out0(in0.dtype(), shape);
  py::array out1(in0.dtype(), shape);
  {
    // The GIL is released for the loop, which touches no Python object: other threads of the stub
    // (another request's, a decoupled model's) run meanwhile. It is taken back at the end of the block.
    py::gil_scoped_release no_gil;
    AddSub(
        static_cast<const Element*>(in0.data()),
        static_cast<const Element*>(in1.data()),
        static_cast<Element*>(out0.mutable_data()),
        static_cast<Element*>(out1.mutable_data()),
        static_cast<std::size_t>(in0.size()));
  }
  return py::make_tuple(out0, out1);  // a Python tuple of the two arrays
}

}  // namespace
}  // namespace {{ c.backend_name }}

// The module's initialization, run by `import {{ module }}`: the name must be the file's (the CMake
// target's), or Python refuses the module. m.attr sets a module attribute, m.def binds a function with
// its keyword arguments (py::arg) and docstring.
PYBIND11_MODULE({{ module }}, m)
{
  m.doc() = "Hot loop of the {{ c.backend_name }} backend: element-wise add/sub over {{ np_type }} arrays.";
  m.attr("DTYPE") = {{ c.backend_name }}::kDtypeName;
  m.def(
      "add_sub", &{{ c.backend_name }}::AddSubArrays, py::arg("in0"), py::arg("in1"),
      "Return (in0 + in1, in0 - in1) for two C-contiguous {{ np_type }} arrays of equal shape.");
}
