# Notifications (filled by the notifications change)

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0022_grants"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='CallReminder',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('run_id', models.CharField(max_length=255)),
                ('tool_call_id', models.CharField(max_length=255)),
                ('expires_at', models.DateTimeField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('run_id', 'tool_call_id', 'expires_at'), name='call_reminder_once_uniq')],
            },
        ),
        migrations.CreateModel(
            name='Notification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('channel', models.CharField(choices=[('email', 'email'), ('chat', 'chat')], max_length=8)),
                ('kind', models.CharField(choices=[('parked', 'calls wait'), ('reminder', 'deadline soon'), ('escalated', 'escalated')], max_length=16)),
                ('agent_id', models.CharField(blank=True, max_length=255)),
                ('call_count', models.PositiveIntegerField(default=0)),
                ('status', models.CharField(choices=[('pending', 'pending'), ('sending', 'sending'), ('sent', 'sent'), ('failed', 'failed (gave up)')], default='pending', max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('last_error', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('next_attempt_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('claimed_until', models.DateTimeField(blank=True, null=True)),
                ('sent_at', models.DateTimeField(blank=True, null=True)),
                ('recipient', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='notifications', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='NotificationCall',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent_id', models.CharField(max_length=255)),
                ('run_id', models.CharField(max_length=255)),
                ('tool_call_id', models.CharField(max_length=255)),
                ('tool_name', models.CharField(max_length=255)),
                ('args', models.JSONField(blank=True, null=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('escalated_to', models.CharField(blank=True, max_length=150)),
                ('notification', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='calls', to='approvals.notification')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.CreateModel(
            name='NotificationPreference',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('mode', models.CharField(choices=[('each', 'Each call (bursts collapse into one message)'), ('digest', 'A digest every few minutes'), ('off', 'Off')], default='each', max_length=8)),
                ('email', models.BooleanField(default=True, help_text='To the address of your account.')),
                ('chat_url', models.URLField(blank=True, help_text='A Slack-compatible incoming webhook; empty: no chat messages.', max_length=500, verbose_name='Chat webhook URL')),
                ('digest_minutes', models.PositiveIntegerField(default=15, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1440)])),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='notification_preference', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.AddIndex(
            model_name='notification',
            index=models.Index(fields=['status', 'next_attempt_at'], name='notification_due_idx'),
        ),
        migrations.AddConstraint(
            model_name='notification',
            constraint=models.UniqueConstraint(condition=models.Q(('attempts', 0), ('status', 'pending')), fields=('recipient', 'channel', 'kind', 'agent_id'), name='notification_one_open_uniq'),
        ),
    ]
