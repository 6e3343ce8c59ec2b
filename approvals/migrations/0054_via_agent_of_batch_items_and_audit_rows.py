from django.db import migrations, models


class Migration(migrations.Migration):
    """Which sub-agent a supervisor's mirrored call is of, kept with a batch's item and an audit row:
    its tool reads the call there, never a namesake of the supervisor's. Rows from before read as
    the agent's own, as they did."""

    dependencies = [
        ("approvals", "0053_request_asked_by"),
    ]

    operations = [
        migrations.AddField(
            model_name="batchitem",
            name="via_agent_id",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="via_agent_id",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
    ]
