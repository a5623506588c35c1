{%- import "native_names.j2" as native with context -%}
{%- set c = cookiecutter -%}{% set module = native.module -%}{% set np_type = native.np_type -%}{% set owner = native.owner -%}
{%- import "generated_header.j2" as generated with context %}{{ generated.header("//", "native/src/compute.cc") }}
//
// The elements of the {{ c.dtype }} arrays the extension {{ module }} computes on, and the hot loop
// your native/src/compute.cc defines: the binding ({{ module }}.cc) checks the arrays and calls it.
#pragma once

#include <cstddef>
#include <cstdint>
{%- if c.dtype == 'FP16' %}
#include <cstring>
{%- endif %}

namespace {{ c.backend_name }} {

// numpy's name of the tensors' data type: the binding refuses arrays of any other.
constexpr const char* kDtypeName = "{{ np_type }}";
{%- if c.dtype == 'FP16' %}
{% include "native_half.h.j2" %}
{%- else %}

// Element: the arrays' element type; Compute: the type the arithmetic runs in (the same here).
using Element = {{ {'FP32': 'float', 'INT32': 'int32_t', 'INT64': 'int64_t'}.get(c.dtype, 'float') }};
using Compute = Element;

inline Compute ToCompute(Element value) { return value; }
inline Element FromCompute(Compute value) { return value; }
{%- endif %}

// Your hot loop (native/src/compute.cc): out0[i] and out1[i] from in0[i] and in1[i] for every i below
// count, over C-contiguous arrays; it runs without Python's GIL, so it must not touch Python objects.
void AddSub(
    const Element* in0, const Element* in1, Element* out0, Element* out1, std::size_t count);

}  // namespace {{ c.backend_name }}
