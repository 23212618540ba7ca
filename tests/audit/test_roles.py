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
