import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Tests run against the working tree even where the package is not installed.
sys.path.insert(0, str(ROOT / "compiler"))
os.environ.setdefault("MPLBACKEND", "Agg")
