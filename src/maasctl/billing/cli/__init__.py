"""`maasctl billing ...`: argument parsing of every billing command (MAASCTL_* fallbacks); each hands a
settings object to the process or tool it starts.
"""
