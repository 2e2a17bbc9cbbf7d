"""Adversarial training: FGSM-RS and PGD attacks, sequential PGD-K / FGSM-RS training,
and parallel adversary generation (P producers on possibly stale weights, one trainer)."""
