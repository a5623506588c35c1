"""Running a sanitizer build (``tbgen build --sanitize``): what the server needs preloaded, the options it
runs with, and the reports a run left in the server log.

tritonserver itself is not instrumented, so a backend built with -fsanitize=address needs the ASan runtime
loaded first (LD_PRELOAD) or it refuses to start. The runtimes are found from the library's own
dependencies (``ldd``), so whatever build is installed is served correctly. Reports go to the server's
stderr, which is the server log; ``sanitizer_reports`` finds them there.

Leaks: LeakSanitizer's check at exit never runs in the 2.51 server with the ASan runtime preloaded: its exit
deadlocks in a library's destructor (p11-kit's, waiting on glibc's locale lock) before LeakSanitizer's own
handler, and the server is killed. So tbgen preloads a small library of its own beside the runtimes
(LEAK_CHECK_SOURCE, compiled here once): on SIGUSR2 it runs LeakSanitizer's recoverable check
(``__lsan_do_recoverable_leak_check``) in the running server and prints LEAK_CHECK_DONE after the report.
The suite sends the signal once the checks are done (``leak_reports`` keeps the leaks the backend allocated).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import signal
import subprocess
from pathlib import Path

# ASan first: it must come before every other library, UBSan's runtime after it.
_RUNTIME_ORDER = ("libasan", "libubsan")
_LDD_LINE = re.compile(r"^\s*((lib(?:asan|ubsan))\.so\S*)\s+=>\s+(/\S+)", re.MULTILINE)
_REPORT = re.compile(r"ERROR: AddressSanitizer|: runtime error: ")
_LEAK = re.compile(r"^(?:Direct|Indirect) leak of \d+ byte", re.MULTILINE)

# leak_check_at_exit=0: the leak check runs on tbgen's signal instead (see the module); detect_leaks=1 lets
# it run. protect_shadow_gap=0: CUDA's driver maps memory there.
ASAN_OPTIONS = "detect_leaks=1:leak_check_at_exit=0:protect_shadow_gap=0:halt_on_error=1"
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=0"

LEAK_CHECK_SIGNAL = signal.SIGUSR2
LEAK_CHECK_DONE = "tbgen: leak check done"
# Preloaded after the ASan runtime: a thread that waits on a pipe, written by the SIGUSR2 handler (a handler
# may only write), and runs LeakSanitizer's recoverable check when it is. Built with -Wall -Wextra -Werror.
LEAK_CHECK_SOURCE = r"""
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

extern int __lsan_do_recoverable_leak_check(void);
static int pipe_fds[2];

static void on_signal(int number) {
  (void)number;
  char byte = 1;
  ssize_t written = write(pipe_fds[1], &byte, 1);
  (void)written;
}

static void* check_on_request(void* unused) {
  (void)unused;
  char byte;
  while (read(pipe_fds[0], &byte, 1) == 1) {
    int leaked = __lsan_do_recoverable_leak_check();
    fprintf(stderr, "%s (%d)\n", "LEAK_CHECK_DONE", leaked);
    fflush(stderr);
  }
  return NULL;
}

__attribute__((constructor)) static void start_leak_check_thread(void) {
  if (pipe(pipe_fds) != 0) return;
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before); /* the thread takes no signal: the server's threads do */
  pthread_t thread;
  int started = pthread_create(&thread, NULL, check_on_request, NULL);
  pthread_sigmask(SIG_SETMASK, &before, NULL);
  if (started != 0) return;
  pthread_detach(thread);
  struct sigaction action = {0};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &action, NULL);
}
""".replace("LEAK_CHECK_DONE", LEAK_CHECK_DONE)
LEAK_CHECK_LIBRARY = "libtbgen_leakcheck"


def parse_ldd_runtimes(output: str) -> tuple[Path, ...]:
    """The sanitizer runtimes in ``ldd`` output, ASan first."""
    found = {match.group(2): Path(match.group(3)) for match in _LDD_LINE.finditer(output)}
    return tuple(found[name] for name in _RUNTIME_ORDER if name in found)


def sanitizer_runtimes(library: Path) -> tuple[Path, ...]:
    """The sanitizer runtimes ``library`` links (none for a plain build)."""
    try:
        output = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_ldd_runtimes(output)


def leak_check_library(directory: Path) -> Path | None:
    """The leak-check library (see the module) compiled into ``directory`` (once per source: its hash is in
    the name); None when no C compiler can build it."""
    digest = hashlib.sha256(LEAK_CHECK_SOURCE.encode()).hexdigest()[:12]
    library = directory / f"{LEAK_CHECK_LIBRARY}.{digest}.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if library.is_file() or compiler is None:
        return library if library.is_file() else None
    source = directory / f"{LEAK_CHECK_LIBRARY}.{digest}.c"
    directory.mkdir(parents=True, exist_ok=True)
    source.write_text(LEAK_CHECK_SOURCE)
    partial = library.with_suffix(".so.partial")
    command = [
        compiler,
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        str(source),
        "-o",
        str(partial),
    ]
    try:
        built = subprocess.run(command + ["-lpthread"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        built = False
    if not built:
        return None
    partial.replace(library)
    return library


def leak_reports(log: str, backend: str) -> list[str]:
    """LeakSanitizer's leak reports in ``log`` whose allocation stack passes through the backend ``backend``
    (its library, or its namespace triton::backend::<backend>): the server's own allocations are not the
    backend's to answer for."""
    found = []
    for match in _LEAK.finditer(log):
        block = log[match.start() :].split("\n\n", 1)[0]
        if f"libtriton_{backend}" in block or f"::{backend}::" in block:
            found.append(block)
    return found


def sanitizer_environment(runtimes: tuple[Path, ...]) -> dict[str, str]:
    """The server's environment additions for a backend that links ``runtimes`` (empty for none)."""
    if not runtimes:
        return {}
    return {
        "LD_PRELOAD": ":".join(map(str, runtimes)),
        "ASAN_OPTIONS": ASAN_OPTIONS,
        "UBSAN_OPTIONS": UBSAN_OPTIONS,
    }


def sanitizer_reports(log: str, context: int = 6) -> list[str]:
    """Each sanitizer report in a server log: its first line and the ``context`` lines after it."""
    lines = log.splitlines()
    return [
        "\n".join(lines[index : index + 1 + context])
        for index, line in enumerate(lines)
        if _REPORT.search(line)
    ]
