"""The contract between the training loop and a model family: the spec (:mod:`.family`: ``ModelFamily``,
``Components``, ``REQUIRED``) and the optional capabilities (:mod:`.capabilities`: protocols and the helpers that
give their default behaviour). It imports no family and no module of the layers above it (data, output, training);
the run config only for type checking."""
