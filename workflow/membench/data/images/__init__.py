"""Image datasets as LMDBs (config/README.md, ``images``): ImageFolder and CIFAR python batches in,
one LMDB per split out, read back by a DataLoader-friendly reader; plus a generated default image
folder."""
