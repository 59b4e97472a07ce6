"""Writes data/digits.u8: the scikit-learn digits set (UCI optical digits test set, CC BY 4.0)
as 1797 rows of 65 bytes: 64 pixels (8x8, values 0..16) then the label (0..9).

Source: sklearn/datasets/data/digits.csv.gz inside the scikit-learn wheel. Usage:
pip download --no-deps scikit-learn -d /tmp/skl && python3 tools/digits_data.py /tmp/skl/scikit_learn-*.whl
(or pass the digits.csv.gz taken out of the wheel)
"""
import gzip
import sys
import zipfile

src = sys.argv[1]
if src.endswith(".whl"):
    with zipfile.ZipFile(src) as z:
        raw = z.read("sklearn/datasets/data/digits.csv.gz")
else:  # the digits.csv.gz taken out of the wheel
    raw = open(src, "rb").read()
rows = gzip.decompress(raw).decode().split()
out = bytearray()
for r in rows:
    v = [int(float(x)) for x in r.split(",")]
    assert len(v) == 65 and all(0 <= x <= 16 for x in v[:64]) and 0 <= v[64] <= 9
    out += bytes(v)
assert len(rows) == 1797
open("data/digits.u8", "wb").write(out)
print(f"data/digits.u8: {len(rows)} rows, {len(out)} bytes")
