"""Toolchain stage: turning a generated project's sources into a built backend (CMake driver, and later
Triton's source cache, CUDA detection and symbol checks)."""
