"""accounts.roles.grant_role keeps is_staff in step with the role."""
import pytest

from accounts.models import User
from accounts.roles import RoleError, can_audit, grant_role, is_staff_role
from tests.factories import OwnerFactory


@pytest.mark.parametrize("role, staff", [("auditor", True), ("staff", True), ("owner", False), ("buyer", False)])
def test_grant_role_sets_is_staff(db, role, staff):
    user = grant_role(OwnerFactory(is_staff=not staff), role)
    user.refresh_from_db()
    assert (user.role, user.is_staff) == (role, staff)
    assert can_audit(user) == staff and is_staff_role(user) == (role == "staff")


def test_superusers_keep_is_staff_and_unknown_roles_are_refused(db):
    root = User.objects.create_superuser("root", "r@example.org", "pw")
    grant_role(root, "owner")
    assert root.is_staff and is_staff_role(root) and can_audit(root)
    with pytest.raises(RoleError):
        grant_role(root, "admin")
    inactive = grant_role(OwnerFactory(is_active=False), "auditor")
    assert inactive.is_staff and not can_audit(inactive)


def test_each_account_acts_with_exactly_one_role_and_is_staff_is_none(auditor):
    from django.contrib.auth.models import AnonymousUser

    from accounts import roles
    from tests.factories import BuyerFactory, StaffFactory

    staff, buyer = StaffFactory(), BuyerFactory()
    root = User.objects.create_superuser("root", "r@example.org", "pw")  # role field: owner
    assert auditor.is_staff and roles.role_of(auditor) == "auditor"
    assert not roles.is_staff_role(auditor) and not roles.can_read_purchased_data(auditor) and roles.can_audit(auditor)
    assert roles.role_of(staff) == "staff" and roles.can_read_purchased_data(staff) and roles.can_curate(staff)
    assert roles.role_of(root) == "staff" and not roles.can_use_portal(root) and not roles.can_buy(root)
    assert roles.is_superuser(root) and not roles.is_superuser(staff)
    grant_role(root, "buyer")
    assert roles.role_of(root) == "staff"  # a superuser is staff whatever its role field says
    buyer.is_active = False
    assert roles.role_of(buyer) is None and not roles.can_buy(buyer)
    assert roles.role_of(AnonymousUser()) is None and roles.role_of(None) is None
    hand_made = BuyerFactory(is_staff=True)  # is_staff set by hand grants nothing
    assert roles.role_of(hand_made) == "buyer" and not roles.can_audit(hand_made)


def test_no_interface_decides_by_is_staff_or_the_role_field_itself():
    """``accounts.roles`` is the only place that reads ``is_staff``, ``is_superuser`` or the role field to decide
    what an account may do (a second copy is how auditors, who have is_staff, came to read purchased data)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"(?<!roles)\.(is_staff|is_superuser)\b(?!\s*=[^=])|\.role\s*(==|!=|\bin\b|\bnot\b)"
                         r"|get_role_display")
    offenders = []
    for package in ("accounts", "audit", "market", "portal", "buyer_portal", "ldpmarket", "templates"):
        for path in (root / package).rglob("*"):
            if path.suffix not in (".py", ".html") or "migrations" in path.parts or path.name == "roles.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
