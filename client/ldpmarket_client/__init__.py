"""Python client and command line for the buyer API of an ldpmarket service, the owner SDK for values kept on
the owner's machine (docs/client.md), and the receipts verifier (docs/client.md#verifying-receipts)."""
from .client import Client
from .errors import ClientError, ProblemError, PurchaseFailed, WaitTimeout
from .owner import Owner, OwnerError
from .receipts import Report, verify_bundle

__all__ = ["Client", "ClientError", "Owner", "OwnerError", "ProblemError", "PurchaseFailed", "Report", "WaitTimeout",
           "verify_bundle"]
__version__ = "0.1.0"
