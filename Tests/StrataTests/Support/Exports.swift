// The helpers shared with StrataReliabilityTests (Tests/StrataTestSupport), visible in every file.
@_exported import StrataTestSupport
