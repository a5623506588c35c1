"""Judging what a server answered: outputs against reference.py, the served config against config.pbtxt."""

from __future__ import annotations

from typing import Any

import numpy as np

# ---- Outputs --------------------------------------------------------------------------------------------


def is_exact_dtype(dtype: np.dtype) -> bool:
    """Integers, booleans and bytes compare exactly; floats within the tolerance."""
    return not np.issubdtype(np.dtype(dtype), np.inexact)


def output_mismatches(
    got: dict[str, np.ndarray | None], expected: dict[str, np.ndarray], tolerance: dict[str, float]
) -> list[str]:
    """Why ``got`` differs from ``expected`` (one line per output), or [] when every output matches.

    Integers, booleans and bytes must be equal; floats must satisfy ``numpy.isclose`` with
    ``tolerance`` (``rtol``, ``atol``), NaN equal to NaN."""
    problems = []
    for name, want in expected.items():
        want = np.asarray(want)
        have = got.get(name)
        if have is None:
            problems.append(f"{name}: missing from the response")
            continue
        if have.dtype != want.dtype and not (have.dtype.kind in "OSU" and want.dtype.kind in "OSU"):
            problems.append(f"{name}: dtype {have.dtype}, expected {want.dtype}")
            continue
        if have.shape != want.shape:
            problems.append(f"{name}: shape {list(have.shape)}, expected {list(want.shape)}")
            continue
        if is_exact_dtype(want.dtype):
            bad = have != want
            how = "exactly"
        else:
            rtol, atol = float(tolerance.get("rtol", 0.0)), float(tolerance.get("atol", 0.0))
            bad = ~np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
            how = f"within rtol={rtol:g}, atol={atol:g}"
        bad = np.asarray(bad)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            problems.append(
                f"{name}: {int(bad.sum())} of {bad.size} elements differ {how}; first at {list(first)}: "
                f"got {have[first]!r}, expected {want[first]!r}"
            )
    return problems


def assert_outputs_match(
    got: dict[str, np.ndarray | None], expected: dict[str, np.ndarray], tolerance: dict[str, float], context: str
) -> None:
    problems = output_mismatches(got, expected, tolerance)
    if problems:
        raise AssertionError(f"{context}: outputs differ from reference.py: " + "; ".join(problems))


# ---- Configs --------------------------------------------------------------------------------------------


def config_differences(local: Any, served: Any, path: str = "") -> list[str]:
    """Each field that ``local`` (config.pbtxt) sets and ``served`` has with another value.

    Fields the server fills in (defaults, auto-completed values) are not differences; repeated messages with
    a ``name`` are matched by name, others by position."""
    from google.protobuf.descriptor import FieldDescriptor

    problems = []
    for descriptor, value in local.ListFields():
        where = f"{path}.{descriptor.name}" if path else descriptor.name
        other = getattr(served, descriptor.name)
        is_message = descriptor.type == FieldDescriptor.TYPE_MESSAGE
        if descriptor.label == FieldDescriptor.LABEL_REPEATED and is_message and descriptor.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if key not in other:
                    problems.append(f"{where}[{key}]: missing as served")
                elif hasattr(item, "ListFields"):
                    problems += config_differences(item, other[key], f"{where}[{key}]")
                elif item != other[key]:
                    problems.append(f"{where}[{key}]: {item!r} in config.pbtxt, {other[key]!r} as served")
        elif descriptor.label == FieldDescriptor.LABEL_REPEATED and is_message:
            named = all(getattr(item, "name", "") for item in value)
            served_by_name = {getattr(item, "name", ""): item for item in other}
            for index, item in enumerate(value):
                key = item.name if named else index
                match = served_by_name.get(key) if named else (other[index] if index < len(other) else None)
                if match is None:
                    problems.append(f"{where}[{key}]: missing as served")
                else:
                    problems += config_differences(item, match, f"{where}[{key}]")
        elif is_message:
            if not served.HasField(descriptor.name):
                problems.append(f"{where}: set in config.pbtxt, missing as served")
            else:
                problems += config_differences(value, other, where)
        elif descriptor.label == FieldDescriptor.LABEL_REPEATED:
            if list(value) != list(other):
                problems.append(f"{where}: {list(value)} in config.pbtxt, {list(other)} as served")
        elif value != other:
            problems.append(f"{where}: {value!r} in config.pbtxt, {other!r} as served")
    return problems
