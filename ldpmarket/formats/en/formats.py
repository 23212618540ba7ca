"""English (``en``, also ``en-us``): the portal's date format (``portal/templates``: ``j M Y, H:i`` and "(UTC)"),
here with the zone's name (the ``e`` format character) so that a deployment in another ``TIME_ZONE`` says so.
Django's own ``en`` formats supply everything else."""
DATETIME_FORMAT = "j M Y, H:i (e)"
SHORT_DATETIME_FORMAT = "j M Y, H:i (e)"
DATE_FORMAT = "j M Y"
TIME_FORMAT = "H:i"
