"""Judging what a server answered: outputs against reference.py, the served config against config.pbtxt."""

from __future__ import annotations

from typing import Any

from triton_backend_gen.lazy import lazy_module

np = lazy_module("numpy")
protobuf_descriptor = lazy_module("google.protobuf.descriptor")

# ---- Outputs --------------------------------------------------------------------------------------------

# Said when rows agree in number but not in width: a response carries one shape per output, so the rows of a
# batched output with a -1 dim share one size within a request (and may differ between requests).
_ROW_WIDTH_RULE = (
    " (where config.pbtxt gives the output a -1 dim, every row of one request has the same size "
    "there, Triton's rule: pad the shorter rows, in the model and in reference.py)"
)


def is_exact_dtype(dtype: np.dtype) -> bool:
    """Integers, booleans and bytes compare exactly; floats within the tolerance."""
    return not np.issubdtype(np.dtype(dtype), np.inexact)


def output_mismatches(
    got: dict[str, np.ndarray | None], expected: dict[str, np.ndarray], tolerance: dict[str, float]
) -> list[str]:
    """Why ``got`` differs from ``expected`` (one line per output), or [] when every output matches.

    Integers, booleans and bytes must be equal; floats must satisfy ``numpy.isclose`` with
    ``tolerance`` (``rtol``, ``atol``), NaN equal to NaN."""
    problems = [
        _output_mismatch(name, got.get(name), np.asarray(want), tolerance) for name, want in expected.items()
    ]
    return [problem for problem in problems if problem is not None]


def _output_mismatch(
    name: str, have: np.ndarray | None, want: np.ndarray, tolerance: dict[str, float]
) -> str | None:
    """Why one output differs from reference.py's, or None: its presence, dtype, shape, then values."""
    if have is None:
        return f"{name}: missing from the response"
    # Bytes come back as numpy objects whatever reference.py made them (object, bytes or str arrays).
    if have.dtype != want.dtype and not (have.dtype.kind in "OSU" and want.dtype.kind in "OSU"):
        return f"{name}: dtype {have.dtype}, expected {want.dtype}"
    if have.shape != want.shape:
        rows_differ = have.ndim == want.ndim > 1 and have.shape[0] == want.shape[0]
        rule = _ROW_WIDTH_RULE if rows_differ else ""
        return f"{name}: shape {list(have.shape)}, expected {list(want.shape)}{rule}"
    return _value_mismatch(name, have, want, tolerance)


def _value_mismatch(name: str, have: np.ndarray, want: np.ndarray, tolerance: dict[str, float]) -> str | None:
    """How the elements of two arrays of one shape differ (exactly, or within ``tolerance`` for floats), or
    None."""
    if is_exact_dtype(want.dtype):
        bad = have != want
        how = "exactly"
    else:
        rtol, atol = float(tolerance.get("rtol", 0.0)), float(tolerance.get("atol", 0.0))
        bad = ~np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
        how = f"within rtol={rtol:g}, atol={atol:g}"
    bad = np.asarray(bad)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    return (
        f"{name}: {int(bad.sum())} of {bad.size} elements differ {how}; first at {list(first)}: "
        f"got {have[first]!r}, expected {want[first]!r}"
    )


def assert_outputs_match(
    got: dict[str, np.ndarray | None],
    expected: dict[str, np.ndarray],
    tolerance: dict[str, float],
    context: str,
) -> None:
    problems = output_mismatches(got, expected, tolerance)
    if problems:
        raise AssertionError(f"{context}: outputs differ from reference.py: " + "; ".join(problems))


# ---- Configs --------------------------------------------------------------------------------------------


def config_differences(local: Any, served: Any, path: str = "") -> list[str]:
    """Each field that ``local`` (config.pbtxt) sets and ``served`` has with another value.

    Fields the server fills in (defaults, auto-completed values) are not differences; repeated messages with
    a ``name`` are matched by name, others by position."""
    problems = []
    for descriptor, value in local.ListFields():
        where = f"{path}.{descriptor.name}" if path else descriptor.name
        problems += _field_differences(descriptor, value, served, where)
    return problems


def _field_differences(
    descriptor: protobuf_descriptor.FieldDescriptor, value: Any, served: Any, where: str
) -> list[str]:
    """How one field set in config.pbtxt differs from ``served``, by the field's kind."""
    other = getattr(served, descriptor.name)
    is_message = descriptor.type == protobuf_descriptor.FieldDescriptor.TYPE_MESSAGE
    is_repeated = descriptor.label == protobuf_descriptor.FieldDescriptor.LABEL_REPEATED
    if is_repeated and is_message and descriptor.message_type.GetOptions().map_entry:
        return _map_differences(value, other, where)
    if is_repeated and is_message:
        return _repeated_message_differences(value, other, where)
    if is_message:
        return _message_differences(value, served, descriptor.name, where)
    if is_repeated:
        value, other = list(value), list(other)
    return [f"{where}: {value!r} in config.pbtxt, {other!r} as served"] if value != other else []


def _message_differences(value: Any, served: Any, name: str, where: str) -> list[str]:
    """A singular message field: missing as served, or its own fields' differences."""
    if not served.HasField(name):
        return [f"{where}: set in config.pbtxt, missing as served"]
    return config_differences(value, getattr(served, name), where)


def _map_differences(value: Any, other: Any, where: str) -> list[str]:
    """A map field, entry by key."""
    problems = []
    for key, item in value.items():
        if key not in other:
            problems.append(f"{where}[{key}]: missing as served")
        elif hasattr(item, "ListFields"):
            problems += config_differences(item, other[key], f"{where}[{key}]")
        elif item != other[key]:
            problems.append(f"{where}[{key}]: {item!r} in config.pbtxt, {other[key]!r} as served")
    return problems


def _repeated_message_differences(value: Any, other: Any, where: str) -> list[str]:
    """A repeated message field: items matched by ``name`` when every item has one, else by position."""
    named = all(getattr(item, "name", "") for item in value)
    served_by_name = {getattr(item, "name", ""): item for item in other}
    problems = []
    for index, item in enumerate(value):
        key = item.name if named else index
        match = served_by_name.get(key) if named else (other[index] if index < len(other) else None)
        if match is None:
            problems.append(f"{where}[{key}]: missing as served")
        else:
            problems += config_differences(item, match, f"{where}[{key}]")
    return problems
