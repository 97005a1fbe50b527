"""Commands ``bringup run`` and ``bringup chat``: run the native program the workflow built for a
model (``results/NAME/build``) through ``bringup-run -m``. Not a stage: nothing is written."""
