{%- import "generated_header.j2" as generated with context %}{{ generated.header("//", "src/compute.cc") }}
{%- import "family.j2" as family with context %}
{% include "decoupled_" ~ family.kind ~ ".cc.j2" %}