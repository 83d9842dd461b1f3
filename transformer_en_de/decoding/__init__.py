"""What every caller decodes with: loading a model, the engine, and its PyTorch and CTranslate2 backends."""
