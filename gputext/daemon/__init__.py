"""The warm server: every ``gputext`` command after the first answers from a process whose imports
are already done.

A fresh ``gputext`` process spends over a second before its first instruction of work: Python,
NumPy, SciPy, h5py, numba and numba-cuda's imports, and numba's typing and lowering registries
for the CPU and the GPU (docs/first_answer.md). The kernel cache removed the compiling; this
removes the rest, the way Gradle's daemon, Bazel's server and Nailgun do for the JVM:

- ``gputext`` (the console script, ``client.main``) imports nothing but the standard library. It
  computes the server's key (``key.py``), connects to that server's Unix socket, hands it the
  command line, the working folder, the environment, the umask, the resource limits, the CPU
  affinity and the signals it ignores, and passes its own stdin, stdout and stderr as file
  descriptors (SCM_RIGHTS). It forwards Ctrl-C, SIGTERM, SIGHUP, SIGQUIT and SIGUSR1/2 unless it
  ignores them (under ``nohup`` the command ignores SIGHUP, as it would in its own process,
  whatever the server inherited), waits, and exits with the command's exit status (a command
  killed by a signal kills the client with the same signal). With no server it runs the command itself,
  as before, and starts a server in the background for the next command.
- The server (``server.py``) imports the whole CLI, numba and numba-cuda, loads numba's
  registries for both targets and the CPU twins' cached machine code, and then waits. Each
  command is one ``fork()``: the child takes the client's descriptors, folder, environment and
  limits, runs ``gputext.cli.main`` and exits; the server sends the exit status back. The child
  starts the CUDA driver itself (a CUDA context cannot cross a fork), in the background from its
  first line as a fresh process does, and loads its kernels from the kernel cache.
- The key is a digest of the Python executable, the code (path, size and modification time of
  every source file of the package, and of every ``sys.path`` folder, so a reinstall or an
  upgrade of numba starts a new server) and the environment variables read at import time
  (``NUMBA_*``, ``CUDA_*``, ``GPUTEXT_*``, ``PYTHON*``, thread and locale settings: ``key.KEYED``).
  Every other variable is the client's own in the child, which sees the client's whole
  environment. A server whose key no client asks for any more exits when idle.
- The socket lives in ``$XDG_RUNTIME_DIR/gputext`` or ``/tmp/gputext-<uid>`` (a folder of mode
  0700 owned by the user; the server also checks its peer's user id), one per key. A server
  exits after ``GPUTEXT_DAEMON_IDLE`` seconds with no command (600 by default), when its socket
  is removed, or on ``gputext daemon stop``.

``GPUTEXT_DAEMON=0`` runs every command in its own process (the test suite does, but for the
server's own tests). ``gputext daemon status | start | stop`` show and control it; ``start``
waits until the server answers.
"""
