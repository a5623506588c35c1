{%- import "generated_header.j2" as generated with context %}{{ generated.header("#", "model_repository/" ~ cookiecutter.model_name ~ "/1/compute.py") }}
{#- The generated plumbing of the decoupled Python model (language=python), compute.py beside it being the
    user's: one piece per kind of model (the repeat example, a signature of the user's own, a sequence
    model), each rendering as a newline and its lines. -#}
{%- import "signature.j2" as sig with context %}
{%- include 'python_repeat.py.j2' if sig.add_sub else 'python_decoupled_sequence.py.j2' if sig.accumulator else 'python_stream.py.j2' -%}
