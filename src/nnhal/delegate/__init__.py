"""TFLite models as Android runs them: a ``.tflite`` model's HAL partitions run
through a device (``run.HalSession``) beside LiteRT on the original file
(``run.LiteRT``), inputs made and outputs compared (``run``)."""
