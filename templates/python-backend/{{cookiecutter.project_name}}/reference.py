{% include "reference.py.j2" %}
