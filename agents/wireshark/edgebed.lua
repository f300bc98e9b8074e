-- Wireshark dissector for edgebed's UDP messages (agents/formats.py) and probe packets
-- (agents/probe.py).
--
-- Install: copy this file to ~/.local/lib/wireshark/plugins/ (the "Personal Lua Plugins"
-- folder that `tshark -G folders` names; Wireshark before 2.6: ~/.wireshark/plugins/), or load
-- it for one session:
--
--     wireshark -X lua_script:agents/wireshark/edgebed.lua capture.pcap
--     tshark -X lua_script:agents/wireshark/edgebed.lua -r capture.pcap -V
--
-- Edgebed messages are recognised by their content, on any UDP port: a heuristic dissector
-- takes UDP payloads starting with magic "EB", version 1 and a known message type, or with the
-- probe's magic "EBPR". Wireshark tries dissectors registered for a port before heuristics, so
-- when a port of the run belongs to another protocol, enable the UDP preference "Try heuristic
-- sub-dissectors first" (tshark: -o udp.try_heuristic_first:TRUE).
--
-- Display filter fields are edgebed.<message>.<field>, named as in agents/formats.py (for
-- example edgebed.media.sequence, edgebed.ai_nack.count), plus edgebed.magic,
-- edgebed.version and edgebed.type for every message. The u16 list is
-- edgebed.ai_nack.indexes. tests/unit/test_pcap.py checks this file against the Python table.

local edgebed = Proto("edgebed", "edgebed testbed message")

local MAGIC, PROBE_MAGIC, VERSION = "EB", "EBPR", 1
local FRAME_TYPES = {[1] = "I", [2] = "P"}

-- How each kind of fixed field is shown: its size, its ProtoField, and how to add it to a tree.
-- ``add`` returns the value other fields need (a tail's size) and the Info column shows.
local function plain(range_value)
    return function(tree, field, range)
        tree:add(field, range)
        return range_value(range)
    end
end
local function uint(range) return range:uint() end
local function uint64(range) return range:uint64() end

local KINDS = {
    u8 = {size = 1, make = ProtoField.uint8, add = plain(uint)},
    u16 = {size = 2, make = ProtoField.uint16, add = plain(uint)},
    u32 = {size = 4, make = ProtoField.uint32, add = plain(uint)},
    u64 = {size = 8, make = ProtoField.uint64, add = plain(uint64)},
    frame_type = {size = 1,
        make = function(abbr, label)
            return ProtoField.uint8(abbr, label, base.DEC, FRAME_TYPES)
        end,
        add = function(tree, field, range)
            tree:add(field, range)
            return FRAME_TYPES[range:uint()] or range:uint()
        end},
    -- Nanoseconds since the epoch (CLOCK_REALTIME, shared by all hosts of a run): shown with
    -- the date and how long before the capture the packet was sent.
    time = {size = 8, make = ProtoField.uint64,
        add = function(tree, field, range, pinfo)
            local ns = range:uint64()
            local seconds = (ns / 1000000000):tonumber()
            local nanoseconds = (ns % 1000000000):tonumber()
            local before_ms = (pinfo.abs_ts - seconds - nanoseconds / 1e9) * 1000
            tree:add(field, range):append_text(string.format(
                " (%s.%09d UTC, %.3f ms before capture)",
                os.date("!%Y-%m-%d %H:%M:%S", seconds) or "?", nanoseconds, before_ms))
            return ns
        end},
}

-- The tails after the fixed fields: their ProtoField and how to add them, given the bytes
-- left (a size field's value limits them, for sized tails).
local TAILS = {
    bytes = {unit = 1, make = ProtoField.bytes,
        add = function(tree, field, range) tree:add(field, range) end},
    text = {unit = 1, make = ProtoField.string,
        add = function(tree, field, range) tree:add_packet_field(field, range, ENC_UTF_8) end},
    u16_list = {unit = 2, make = ProtoField.uint16,
        add = function(tree, field, range, label)
            local count = math.floor(range:len() / 2)
            local list = tree:add(edgebed, range, string.format("%s (%d)", label, count))
            for index = 0, count - 1 do
                list:add(field, range(index * 2, 2))
            end
        end},
}

-- The wire formats, as in agents/formats.py: type code -> name, fixed fields after the common
-- four bytes (name, kind), and the tail (field name, kind, and the fixed field giving its size).
local MESSAGES = {
    [1] = {name = "media", fields = {
        {"stream", "u32"}, {"sequence", "u32"}, {"send_ns", "time"}, {"frame", "u32"},
        {"frame_type", "frame_type"}, {"rung", "u8"}, {"fragment", "u16"},
        {"fragments", "u16"}, {"bitrate_kbps", "u32"}},
        tail = {"payload", "bytes"}},
    [2] = {name = "danmaku", fields = {
        {"user", "u32"}, {"room", "u32"}, {"sequence", "u32"}, {"send_ns", "time"},
        {"text_length", "u16"}},
        tail = {"text", "text", size = "text_length"}},
    [3] = {name = "gift", fields = {
        {"user", "u32"}, {"room", "u32"}, {"sequence", "u32"}, {"send_ns", "time"},
        {"gift", "u16"}, {"value_cents", "u32"}}},
    [4] = {name = "ai_data", fields = {
        {"stream", "u32"}, {"unit", "u32"}, {"fragment", "u16"}, {"fragments", "u16"},
        {"length", "u16"}, {"send_ns", "time"}},
        tail = {"data", "bytes", size = "length"}},
    [7] = {name = "ai_nack", fields = {{"stream", "u32"}, {"unit", "u32"}, {"count", "u16"}},
        tail = {"indexes", "u16_list", size = "count"}},
    [8] = {name = "request", fields = {
        {"request", "u32"}, {"client", "u32"}, {"content", "u32"}, {"send_ns", "time"},
        {"response_bytes", "u32"}}},
    [9] = {name = "response", fields = {
        {"request", "u32"}, {"server", "u32"}, {"content", "u32"},
        {"request_send_ns", "time"}, {"service_ns", "u64"}},
        tail = {"payload", "bytes"}},
    [10] = {name = "pull", fields = {
        {"stream", "u32"}, {"delivered_stream", "u32"}, {"user", "u32"}, {"send_ns", "time"},
        {"bitrate_kbps", "u32"}, {"rung", "u8"}}},
}
-- The probe's packets (magic "EBPR" instead of the common four bytes), zero padding after.
local PROBE = {name = "probe", fields = {{"flow", "u32"}, {"sequence", "u64"},
                                         {"send_ns", "time"}},
               tail = {"padding", "bytes"}}

local MESSAGE_NAMES = {}
for code, message in pairs(MESSAGES) do MESSAGE_NAMES[code] = message.name end
local common = {
    magic = ProtoField.string("edgebed.magic", "Magic"),
    version = ProtoField.uint8("edgebed.version", "Version"),
    type = ProtoField.uint8("edgebed.type", "Type", base.DEC, MESSAGE_NAMES),
}
local truncated = ProtoExpert.new("edgebed.truncated", "Message cut short",
                                  expert.group.MALFORMED, expert.severity.ERROR)

local function label(name)
    return (name:gsub("_", " "):gsub("^%l", string.upper))
end

-- Every message's ProtoFields, edgebed.<message>.<field>.
local protofields = {common.magic, common.version, common.type}
local function register(message)
    message.protofields = {}
    for _, spec in ipairs(message.fields) do
        local name, kind = spec[1], spec[2]
        local field = KINDS[kind].make("edgebed." .. message.name .. "." .. name, label(name))
        message.protofields[name] = field
        table.insert(protofields, field)
    end
    if message.tail then
        local name = message.tail[1]
        local field = TAILS[message.tail[2]].make("edgebed." .. message.name .. "." .. name,
                                                  label(name))
        message.protofields[name] = field
        table.insert(protofields, field)
    end
end
for _, message in pairs(MESSAGES) do register(message) end
register(PROBE)
edgebed.fields = protofields
edgebed.experts = {truncated}

-- The fixed fields and tail of ``message`` from ``offset`` on; false if the tvb is too short.
local function decode(message, tvb, pinfo, tree, offset)
    local values, info = {}, {}
    for _, spec in ipairs(message.fields) do
        local name, kind = spec[1], KINDS[spec[2]]
        if offset + kind.size > tvb:len() then
            tree:add_proto_expert_info(truncated, "Message cut short in field " .. name)
            return info
        end
        values[name] = kind.add(tree, message.protofields[name], tvb(offset, kind.size), pinfo)
        -- The first two fields tell flows apart (stream and sequence, user and room, ...).
        if #info < 2 then table.insert(info, name .. "=" .. tostring(values[name])) end
        offset = offset + kind.size
    end
    local tail = message.tail
    if tail then
        local kind = TAILS[tail[2]]
        local length = tvb:len() - offset
        if tail.size then
            local declared = values[tail.size] * kind.unit
            if declared > length then
                tree:add_proto_expert_info(truncated, string.format(
                    "%s says %d bytes follow, %d do", tail.size, declared, length))
            end
            length = math.min(length, declared)
        end
        if length > 0 then
            kind.add(tree, message.protofields[tail[1]], tvb(offset, length), label(tail[1]))
        end
    end
    return info
end

local function show(message, tvb, pinfo, tree, header)
    pinfo.cols.protocol = "EDGEBED"
    local subtree = tree:add(edgebed, tvb(), "edgebed " .. message.name)
    header(subtree)
    -- The probe's magic and edgebed's common bytes are both four bytes long.
    local info = decode(message, tvb, pinfo, subtree, 4)
    pinfo.cols.info = message.name .. " " .. table.concat(info, " ")
end

local function heuristic(tvb, pinfo, tree)
    if tvb:len() >= 4 and tvb(0, 4):string() == PROBE_MAGIC then
        show(PROBE, tvb, pinfo, tree, function(subtree) subtree:add(common.magic, tvb(0, 4)) end)
        return true
    end
    if tvb:len() < 4 or tvb(0, 2):string() ~= MAGIC or tvb(2, 1):uint() ~= VERSION then
        return false
    end
    local message = MESSAGES[tvb(3, 1):uint()]
    if not message then
        return false
    end
    show(message, tvb, pinfo, tree, function(subtree)
        subtree:add(common.magic, tvb(0, 2))
        subtree:add(common.version, tvb(2, 1))
        subtree:add(common.type, tvb(3, 1))
    end)
    return true
end

edgebed:register_heuristic("udp", heuristic)
