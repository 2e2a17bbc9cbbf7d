"""GPUMemNet: generate training jobs, measure their memory, learn and compare estimators."""
