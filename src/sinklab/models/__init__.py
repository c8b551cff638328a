"""The models sinklab runs: the native decoder (:mod:`.native`), Hugging Face causal LMs
(:mod:`.hf`), and :mod:`.subjects`, one interface over both for the scanner and interventions."""
