{%- import "generated_header.j2" as generated with context -%}
{%- import "family.j2" as family with context -%}
{{ generated.header("//", "src/compute.cc") }}
{% include "cpp_" ~ {"bls": "bls", "step": "sequence"}.get(family.kind, "batching") ~ ".cc.j2" %}