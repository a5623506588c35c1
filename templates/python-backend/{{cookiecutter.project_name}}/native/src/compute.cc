{%- import "native_names.j2" as native with context -%}
{%- set c = cookiecutter -%}{% set module = native.module -%}{% set np_type = native.np_type -%}{% set owner = native.owner -%}
// Your hot loop for {{ owner }}, in C++: compute.py calls it through the extension as
// native_ext.add_sub(in0, in1) on the {{ c.dtype }} arrays of a request (or of a whole batch). elements.h
// has the element types and their conversions. Keep it computing what reference.py and compute.py's
// numpy fallback compute.

#include "elements.h"

namespace {{ c.backend_name }} {

// ---- Your logic ----
// One element of each output from one element of each input.
inline void
ComputeElement(Compute in0, Compute in1, Compute* out0, Compute* out1)
{
  *out0 = in0 + in1;
  *out1 = in0 - in1;
}

// The loop over the arrays; for logic that is not element-wise, rewrite it.
void
AddSub(const Element* in0, const Element* in1, Element* out0, Element* out1, std::size_t count)
{
  for (std::size_t i = 0; i < count; ++i) {
    Compute first, second;
    ComputeElement(ToCompute(in0[i]), ToCompute(in1[i]), &first, &second);
    out0[i] = FromCompute(first);
    out1[i] = FromCompute(second);
  }
}
// ---- End of your logic ----

}  // namespace {{ c.backend_name }}
