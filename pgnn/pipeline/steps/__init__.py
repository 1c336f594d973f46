"""One module per pipeline stage, each with ``run(params, layout, item)`` (the stage table's entry,
:mod:`pgnn.pipeline.stages`) and the step functions the Prefect flows call piecewise. They hold wiring only:
the logic lives in the layers below (data, graphs, training, inference, eval)."""
