"""Makes crates/rlx-cli/assets/NotoSans-Regular-Latin.ttf, the font of `rlx train`'s loss curve.

Input: NotoSans-Regular.ttf (SIL OFL 1.1, no reserved font name), e.g. from Debian's
fonts-noto-core 20201225-1 (`apt-get download fonts-noto-core && dpkg-deb -x fonts-noto-core_*.deb x`,
then x/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf). Needs `pip install fonttools`.

    python3 tools/plot_font.py NotoSans-Regular.ttf crates/rlx-cli/assets/NotoSans-Regular-Latin.ttf

Two changes to the font:
- only Basic Latin, Latin-1 and a few dashes are kept, and no hinting or layout tables
  (plotters reads neither): 512 KB -> about 17 KB;
- each glyph's advance becomes `advance - left bearing + BEARING`. plotters 0.3.7's ab_glyph text
  draws a glyph's ink at the pen position, dropping its left side bearing, so a glyph with a wide
  bearing (`1`, `l`, `.`) left a visible gap after it ("2.531 ,"). With the bearing folded into the
  advance, the gap after each glyph is its right bearing plus BEARING, close to the font's own
  spacing (its bearings are 40-90 units of 1000).
"""

import sys

from fontTools import subset
from fontTools.ttLib import TTFont

# The left bearing every glyph gets back, in font units (a typical one of Noto Sans' digits).
BEARING = 50


def main(src, dst):
    opts = subset.Options()
    opts.hinting = False
    opts.layout_features = []
    opts.name_IDs = ["*"]
    opts.notdef_outline = True
    font = TTFont(src)
    sub = subset.Subsetter(opts)
    sub.populate(unicodes=[*range(0x20, 0x7F), *range(0xA0, 0x100), 0x2013, 0x2014, 0x2026, 0x2212])
    sub.subset(font)
    glyf, hmtx = font["glyf"], font["hmtx"]
    for name in font.getGlyphOrder():
        adv, lsb = hmtx[name]
        if glyf[name].numberOfContours != 0:
            hmtx[name] = (max(adv - lsb + BEARING, 0), lsb)
    font.save(dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_font.py NotoSans-Regular.ttf OUT.ttf")
    main(sys.argv[1], sys.argv[2])
