"""The benchmarks behind ``kb bench``: each measures on the running stack (or a server of its
own) and returns what it measured, with a table; ``docs/benchmarks/`` holds their results."""
