"""Small hand-made aggregated tables for the report tests."""

import pandas as pd
import pytest


def _write_hotconv(directory, device="cuda", reliable=True):
    """hotconv_sweep.csv and hotconv.csv: MalConv2 and HotConv-Eco, two sweep points, median timings."""
    sweep = pd.DataFrame(
        {
            "variant": ["malconv2", "hotconv_eco", "malconv2", "hotconv_eco"],
            "max_len": [512, 512, 1024, 1024],
            "batch_size": [2, 2, 2, 2],
            "status": ["ok"] * 4,
            "device": [device] * 4,
            "device_name": ["Test GPU"] * 4,
            "step_alloc_peak_mib": [999.0, 1.0, 100.0, 4.0],
        }
    )
    sweep.to_csv(directory / "hotconv_sweep.csv", index=False)
    train = pd.DataFrame(
        {
            "variant": ["malconv2", "hotconv_eco"],
            "dataset": ["tiny", "tiny"],
            "device": [device] * 2,
            "max_len": [1024, 1024],
            "test_accuracy": [0.9, 0.85],
            "time_median_s": [2.0, 3.0],
            "time_unit": ["epoch", "epoch"],
            "timing_reliable": [True, reliable],
            "timing_flag": ["", "" if reliable else "spread 80% over 3 epochs"],
        }
    )
    train.to_csv(directory / "hotconv.csv", index=False)


@pytest.fixture
def write_hotconv():
    return _write_hotconv
