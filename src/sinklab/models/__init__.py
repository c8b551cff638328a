"""The models sinklab runs: the native decoder (:mod:`.native`, with its merged-circuit path
:mod:`.circuits`), Hugging Face causal LMs (:mod:`.hf`), and :mod:`.subjects`, one interface over
both for the scanner and interventions."""
