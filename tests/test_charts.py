"""The Mermaid chart builder's rules (mermaid's own parser checks the output where charts are
emitted: see the gpu-monitor and spend report tests)."""

from __future__ import annotations

import pytest

from gpu_ci.charts import Series, downsample, xychart


def test_downsample_keeps_peaks_and_bounds_points():
    values = [0.0] * 1000
    values[537] = 99.0
    out = downsample(values, 100)
    assert len(out) == 100 and max(out) == 99.0
    assert downsample([1, 2, 3], 100) == [1.0, 2.0, 3.0]
    assert downsample([2, 4, 6, 8], 2, how="mean") == [3.0, 7.0]


def test_chart_text_is_quoted_and_series_match_labels():
    text = xychart(
        'GPU "0" [H200]\nutil',
        ["0m", "1m"],
        [Series("util", (10.0, 99.5))],
        y_title="%",
        y_range=(0, 100),
    )
    assert text.startswith("```mermaid\nxychart-beta\n")
    assert 'title "GPU  0   H200  util"' in text
    assert 'x-axis ["0m", "1m"]' in text and 'y-axis "%" 0 --> 100' in text
    assert "line [10, 99.5]" in text
    with pytest.raises(ValueError, match="2 x labels"):
        xychart("t", ["a", "b"], [Series("s", (1.0,))])
