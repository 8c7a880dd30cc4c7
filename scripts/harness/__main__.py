"""`cd scripts && python -m harness [--device auto|cpu|cuda]`: the environment probe as JSON
(with the measured copy bandwidth on a real GPU): the device round's first step."""
import argparse
import json

import harness
from gputext.backend import resolve

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
print(json.dumps(harness.probe(resolve(ap.parse_args().device), copy_bytes=1 << 30), indent=1))
