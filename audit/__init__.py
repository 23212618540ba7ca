"""The audit app: everything an auditor reads, re-proved from the ledger (docs/budget-rules.md#the-audit).

Read side (selectors, no writes; nothing here imports the interfaces below):

* :mod:`audit.codes` -- the code lists the checks compare (entry kinds, statuses, guarantees, the mechanism table);
* :mod:`audit.sql` -- the dialect-specific SQL (PostgreSQL and SQLite): every dialect branch of the audit;
* :mod:`audit.tables` -- each table read once into exact integer numpy columns;
* :mod:`audit.report` -- the report: checks, sections, text and JSON;
* :mod:`audit.hashchain`, :mod:`audit.replay`, :mod:`audit.budgets`, :mod:`audit.purchases`, :mod:`audit.money` --
  the checks, one concern each; :mod:`audit.budget_audit` runs them all on one snapshot;
* :mod:`audit.privacy` -- the empirical privacy audit (docs/mechanisms-reference.md#privacy-audit-by-inference);
* :mod:`audit.overview` and :mod:`audit.charts` -- the console's overview figures and the plots;
* :mod:`audit.filters` and :mod:`audit.export` -- the ledger filters and the CSV export.

Interfaces: :mod:`audit.api` (``/api/v1/audit/``, its views and routes), :mod:`audit.admin` (the ledger's pages
and the audit pages of the console) and the commands ``audit_budgets``, ``privacy_audit`` and ``export_ledger``.
The audit depends on ``accounts`` and ``market``; neither imports it.
"""
