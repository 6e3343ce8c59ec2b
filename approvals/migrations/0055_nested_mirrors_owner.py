from django.db import migrations


def owners_of_nested_mirrors(apps, schema_editor):
    """A supervisor's mirror of a call its sub-agent mirrored named that sub-agent, not the one that
    parked the call (before ``call_owner``): its tool's namesake would judge the call at the top. The
    mirror is given its inner call's owner, level by level, however deep."""
    calls = apps.get_model("approvals", "ParkedCallRecord")
    using = schema_editor.connection.alias
    mirrors = list(
        calls.objects.using(using)
        .filter(delegation__isnull=False, action__isnull=True)
        .values("id", "delegation", "run__run_id", "tool_call_id")
    )
    by_call = {(m["run__run_id"], m["tool_call_id"]): m for m in mirrors if isinstance(m["delegation"], dict)}
    fixed = {}
    for _ in range(len(by_call)):  # (a pass carries an owner up one level)
        changed = False
        for mirror in by_call.values():
            delegation = mirror["delegation"]
            inner = by_call.get(_inner(delegation))
            owner = inner["delegation"].get("agent_id") if inner is not None else None
            if isinstance(owner, str) and owner and delegation.get("agent_id") != owner:
                delegation["agent_id"] = owner
                fixed[mirror["id"]] = delegation
                changed = True
        if not changed:
            break
    for pk, delegation in fixed.items():
        calls.objects.using(using).filter(pk=pk).update(delegation=delegation)


def _inner(delegation):
    """The inner call a mirror names, as the store reads its ids (text), whatever JSON they are."""
    run_id, call_id = delegation.get("inner_run_id"), delegation.get("inner_tool_call_id")
    return None if run_id is None or call_id is None else (str(run_id), str(call_id))


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0054_via_agent_of_batch_items_and_audit_rows"),
    ]

    operations = [
        migrations.RunPython(owners_of_nested_mirrors, migrations.RunPython.noop),
    ]
