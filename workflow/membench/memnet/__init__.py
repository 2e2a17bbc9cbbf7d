"""GPUMemNet (seed 002): generate training jobs, measure their memory, learn and compare estimators."""
