"""Dataset preparation shared by the systems: BODMAS folds, image LMDBs, graph files."""
