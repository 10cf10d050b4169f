"""Setting a run up before anything is built: which family trains a model (:mod:`.family_inference`)."""
