"""The package's shape: tools/check_architecture.py (no import
cycle, no module over 700 lines, no function over 120, the core never imports the lab)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_architecture():
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "check_architecture.py")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
