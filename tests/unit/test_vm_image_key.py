"""The VM lane's image cache key (`scripts/vm.sh key`): a hash of everything that goes into the
provisioned image, so a changed input builds a new image and an unchanged one reuses the cached
one. Checked on a copy of the files the key reads, each changed in turn."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What `vm.sh key` reads (IMAGE_INPUTS, vm.sh itself), and files that are not in the image: the
# netem command line (the lane's broken-netem check edits it and must reuse the image), the
# README.
FILES = ["scripts/vm.sh", "scripts/setup.sh", "scripts/build-compiled.sh",
         "topologies/impairments/wire_relay.c", "agents/send_engine.c", "pyproject.toml",
         "topologies/impairments/tc.py", "README.md"]

# (file, text, replacement, whether the key must change)
CHANGES = [
    ("scripts/setup.sh", "packages=(mininet ", "packages=(mininet strace ", True),
    ("scripts/setup.sh", 'say "starting Open vSwitch"', 'say "starting OVS"', True),
    ("pyproject.toml", '"PyYAML>=6.0,<7",', '"PyYAML>=6.0,<7", "attrs",', True),
    ("scripts/build-compiled.sh", "flags=(-O2 ", "flags=(-O3 ", True),
    ("topologies/impairments/wire_relay.c", "#include", "/* changed */\n#include", True),
    ("agents/send_engine.c", "#include", "/* changed */\n#include", True),
    ("scripts/vm.sh", "VM_PACKAGES=(linux-image-amd64 ", "VM_PACKAGES=(linux-image-amd64 strace ",
     True),
    ("scripts/vm.sh", "hostname edgebed-vm", "hostname edgebed-vm2", True),  # the VM's init
    ("scripts/vm.sh", "+ 2048 ))", "+ 4096 ))", True),  # the image recipe (build_image)
    ("scripts/vm.sh", "python3 -m compileall -q -j 0 -x", "python3 -m compileall -j 0 -x", True),
    # Not in the image: the guest job runs from the checkout each boot.
    ("scripts/vm.sh", "-p no:cacheprovider", "-p no:cacheprovider -x", False),
    ("topologies/impairments/tc.py", 'parts.append(f"delay {delay', 'parts.append(f"delai {delay',
     False),
    ("README.md", "# edgebed", "# edgebed, changed", False),
]


def copy(into: Path) -> Path:
    for name in FILES:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, into / name)
    return into


def key(checkout: Path) -> str:
    result = subprocess.run(["bash", str(checkout / "scripts" / "vm.sh"), "key"],
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


def test_the_key_is_the_inputs_not_where_they_are(tmp_path):
    first = key(copy(tmp_path / "a"))
    assert len(first) == 16
    assert key(copy(tmp_path / "b")) == first
    assert key(tmp_path / "a") == first


@pytest.mark.parametrize("name,text,replacement,changes", CHANGES)
def test_a_changed_input_changes_the_key_and_nothing_else_does(tmp_path, name, text, replacement,
                                                               changes):
    checkout = copy(tmp_path)
    before = key(checkout)
    path = checkout / name
    content = path.read_text()
    assert text in content, f"{name} no longer holds {text!r}: update this test's change"
    path.write_text(content.replace(text, replacement, 1))
    assert (key(checkout) != before) is changes
