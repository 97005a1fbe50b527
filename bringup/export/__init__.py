"""Export: a certified program as a relocatable, self-checking bundle (``bringup export``), and the
check a receiver runs on it (``bringup verify``, also the certification's standalone gate)."""
