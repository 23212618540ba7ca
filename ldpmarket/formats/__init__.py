"""Date formats of the project (``FORMAT_MODULE_PATH``): the admin shows dates as the portal does, with their zone
("27 Nov 2026, 22:47 (UTC)"), instead of Django's "Nov. 27, 2026, 10:47 p.m." (issue 31)."""
