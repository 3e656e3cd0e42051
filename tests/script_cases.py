"""Run one script's command line several times in one interpreter: `python tests/script_cases.py SCRIPT CASES_JSON`.

The bad-input tests check what a user sees for a mistake: the exit code and stderr of `python cleanrl/X.py FLAGS`.
A fresh interpreter per case repeats the same imports (torch, EnvPool, JAX: seconds each) a hundred times over the
suite, so each test file runs all its cases here, in one process: per case the script runs as `__main__` (as
`python script.py` runs it), file descriptors 1 and 2 go to files of their own (library output written from C is
caught too), and the outcome is what the interpreter would have made of it: the exit code of a SystemExit (its
message on stderr, code 1), or a traceback on stderr and code 1 for any other exception. Prints a JSON list of
{"returncode", "stdout", "stderr"}, one per case, as its last line."""

import json
import os
import runpy
import sys
import tempfile
import traceback


def run_case(script: str, args: list[str]) -> dict:
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [script, *args]
        code = 0
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit:
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
                code = 1
            else:
                code = exit.code or 0
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
        out.seek(0)
        err.seek(0)
        return {"returncode": code, "stdout": out.read(), "stderr": err.read()}


if __name__ == "__main__":
    script, cases = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` puts the script's folder first
    results = [run_case(script, args) for args in cases]
    print(json.dumps(results))
