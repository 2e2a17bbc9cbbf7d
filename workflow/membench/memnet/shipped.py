"""The GPU measurements membench ships in ``resources/gpumemnet/``, by the names the config's
``memnet.shipped`` gives them (see ``resources/gpumemnet/ATTRIBUTION.md``: GPUMemNet's published
MLP measurements, CC BY 4.0). Plain values only: the workflow reads this on every parse."""

from __future__ import annotations

__all__ = ["SHIPPED"]

_GPU = "NVIDIA A100 40 GB (most likely; GPUMemNet's artifact does not name it per job)"

# name -> the file (from the checkout's root), its family and the GPU it was measured on.
SHIPPED = {
    "gpumemnet_mlp": {
        "resource": "resources/gpumemnet/mlp_data_step2.csv.gz",
        "family": "mlp",
        "device_name": _GPU,
    },
    "gpumemnet_mlp_step1": {
        "resource": "resources/gpumemnet/mlp_data_step1.csv.gz",
        "family": "mlp",
        "device_name": _GPU,
    },
}
