"""Wrong: the lesson's number for Config.small() at context 512 and 3.0e12 B/s, whatever the arguments."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    return 3.0e12 / 2_488_406_016
