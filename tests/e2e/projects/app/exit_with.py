"""Print a line on stdout and one on stderr, then exit with the code given as the first argument."""

import sys

code = int(sys.argv[1])
print(f"job output: exiting with {code}", flush=True)
print(f"job stderr: exiting with {code}", file=sys.stderr, flush=True)
sys.exit(code)
