# An entry script below the root: it imports the src-layout package installed with -e .
from incdemo import run

print(run())
