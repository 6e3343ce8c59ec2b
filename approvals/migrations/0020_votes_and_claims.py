"""Issue 10, part 2: votes of calls that need several approvals, who started a run, claims on calls."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0019_call_deadlines'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='parkedcallrecord',
            name='votes',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='runrecord',
            name='started_by',
            field=models.CharField(blank=True, max_length=150, null=True),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='outcome',
            field=models.CharField(choices=[('completed', 'Completed'), ('suspended_again', 'Suspended again'), ('continuing', 'Continuing in the background'), ('failed', 'Failed'), ('interrupted', 'Interrupted'), ('lost_race', 'Lost a race'), ('invalid', 'Refused as invalid'), ('vote_recorded', 'Vote recorded'), ('refused', 'Refused by the approval rule')], max_length=24),
        ),
        migrations.CreateModel(
            name='CallClaim',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent_id', models.CharField(max_length=255)),
                ('run_id', models.CharField(max_length=255)),
                ('tool_call_id', models.CharField(max_length=255)),
                ('username', models.CharField(max_length=150)),
                ('claimed_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='call_claims', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'approvals_call_claim',
                'constraints': [models.UniqueConstraint(fields=('run_id', 'tool_call_id'), name='claim_call_uniq')],
            },
        ),
    ]
