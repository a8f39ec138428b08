ALTER TABLE harmony_machine_details ADD COLUMN IF NOT EXISTS version TEXT;
