"""The progress log the recipes use when stdout is not a terminal."""

import logging

import keras
import numpy as np

from bertzoo.training.callbacks import ProgressLog


def _fit(callback, steps, epochs=1):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((steps * 2, 3), "float32"), np.zeros((steps * 2, 1), "float32")
    model.fit(x, y, batch_size=2, epochs=epochs, callbacks=[callback], verbose=0)


def test_one_plain_line_per_interval_and_at_the_end(caplog):
    logger = logging.getLogger("bertzoo.test_progress")
    progress = ProgressLog(every=2, total=9, logger=logger)
    progress.start_at(4)  # a second phase: global steps 5..9
    with caplog.at_level(logging.INFO, logger="bertzoo.test_progress"):
        _fit(progress, steps=5)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0] for line in lines] == ["step 6/9", "step 8/9", "step 9/9"]
    assert all("loss " in line for line in lines)
    assert not any("\r" in line or "\x1b" in line for line in lines)
