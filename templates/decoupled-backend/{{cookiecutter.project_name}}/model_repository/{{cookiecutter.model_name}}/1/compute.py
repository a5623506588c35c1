{#- The user's file beside the generated model.py of the decoupled Python model: the generator of each
    request's responses (step() for a sequence model), nothing else. -#}
{%- import "signature.j2" as sig with context -%}
{%- include 'python_repeat_compute.py.j2' if sig.add_sub else 'python_decoupled_step.py.j2' if sig.accumulator else 'python_stream_compute.py.j2' -%}
