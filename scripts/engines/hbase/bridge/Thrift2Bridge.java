// logdex's stand-in for HBase's Thrift2 gateway (org.apache.hadoop.hbase.thrift2.ThriftServer),
// for tests only: the registry serves no hbase-thrift jar. It serves the THBaseService subset
// in store/hbase/hbase.thrift (Java generated from it by `thrift --gen java`) and turns every
// call into HBase's own Java client API on a real HBase, with the gateway's conventions:
// reversed scans, caching, limits, filterBytes parsed as a protobuf hbase.pb.Filter by HBase
// itself (ProtobufUtil.toFilter), TIOError with the exception's message and canRetry = not a
// DoNotRetryIOException, TIllegalArgument for an unknown scanner, deleteMultiple returning the
// deletes HBase left, checkAndPut as the gateway's (an empty value is HBase's ifEquals), framed
// frames capped at 2 MiB as the gateway's default.
//
//   java -cp CONF:CLASSES:LIBS Thrift2Bridge HBASE_SITE_XML PORT framed|buffered binary|compact
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.DoNotRetryIOException;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HConstants;
import org.apache.hadoop.hbase.NamespaceDescriptor;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.CheckAndMutate;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptor;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Delete;
import org.apache.hadoop.hbase.client.Durability;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.filter.Filter;
import org.apache.hadoop.hbase.io.compress.Compression;
import org.apache.hadoop.hbase.regionserver.BloomType;
import org.apache.hadoop.hbase.shaded.protobuf.ProtobufUtil;
import org.apache.hadoop.hbase.shaded.protobuf.generated.FilterProtos;
import org.apache.thrift.TException;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.protocol.TCompactProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.layered.TFramedTransport;

public class Thrift2Bridge implements THBaseService.Iface {
  private final Connection conn;
  private final Map<Integer, ResultScanner> scanners = new ConcurrentHashMap<>();
  private final AtomicInteger nextScanner = new AtomicInteger();

  Thrift2Bridge(Connection conn) { this.conn = conn; }

  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    conf.addResource(new Path(args[0]));
    int port = Integer.parseInt(args[1]);
    boolean framed = args[2].equals("framed");
    boolean compact = args[3].equals("compact");
    Connection conn = ConnectionFactory.createConnection(conf);
    THBaseService.Processor<Thrift2Bridge> processor = new THBaseService.Processor<>(new Thrift2Bridge(conn));
    TServerSocket socket = new TServerSocket(new java.net.InetSocketAddress("127.0.0.1", port));
    TThreadPoolServer.Args a = new TThreadPoolServer.Args(socket).processor(processor)
        .minWorkerThreads(4).maxWorkerThreads(64);
    a.protocolFactory(compact ? new TCompactProtocol.Factory() : new TBinaryProtocol.Factory());
    if (framed) a.transportFactory(new TFramedTransport.Factory(2 * 1024 * 1024));
    System.err.println("Thrift2Bridge: serving on 127.0.0.1:" + port + (framed ? " framed" : " buffered")
        + (compact ? " compact" : " binary"));
    new TThreadPoolServer(a).serve();
  }

  // ---- errors ----
  private static TIOError ioError(IOException e) {
    System.err.println("Thrift2Bridge: TIOError: " + e);
    TIOError err = new TIOError();
    err.setMessage(e.getMessage());
    err.setCanRetry(!(e instanceof DoNotRetryIOException));
    return err;
  }

  private interface IoCall<T> { T run() throws IOException; }

  private static <T> T io(IoCall<T> call) throws TIOError {
    try {
      return call.run();
    } catch (IOException e) {
      throw ioError(e);
    }
  }

  // ---- conversions ----
  private static byte[] bytes(ByteBuffer b) {
    if (b == null) return null;
    byte[] out = new byte[b.remaining()];
    b.duplicate().get(out);
    return out;
  }

  private static TableName tableName(ByteBuffer table) { return TableName.valueOf(bytes(table)); }

  private static TableName tableName(TTableName t) {
    return t.isSetNs() ? TableName.valueOf(bytes(t.ns), bytes(t.qualifier)) : TableName.valueOf(bytes(t.qualifier));
  }

  private static Filter filter(ByteBuffer filterBytes) throws IOException {
    return ProtobufUtil.toFilter(FilterProtos.Filter.parseFrom(bytes(filterBytes)));
  }

  private static TResult result(Result r) {
    TResult out = new TResult();
    out.setColumnValues(new ArrayList<>());
    if (r.getRow() != null) out.setRow(r.getRow());
    Cell[] cells = r.rawCells();
    if (cells != null) {
      for (Cell c : cells) {
        TColumnValue v = new TColumnValue(ByteBuffer.wrap(CellUtil.cloneFamily(c)),
            ByteBuffer.wrap(CellUtil.cloneQualifier(c)), ByteBuffer.wrap(CellUtil.cloneValue(c)));
        v.setTimestamp(c.getTimestamp());
        out.addToColumnValues(v);
      }
    }
    out.setStale(r.isStale());
    out.setPartial(r.mayHaveMoreCellsInRow());
    return out;
  }

  private static List<TResult> results(Result[] rs) {
    List<TResult> out = new ArrayList<>(rs.length);
    for (Result r : rs) out.add(result(r));
    return out;
  }

  private static Durability durability(TDurability d) {
    switch (d) {
      case SKIP_WAL: return Durability.SKIP_WAL;
      case ASYNC_WAL: return Durability.ASYNC_WAL;
      case SYNC_WAL: return Durability.SYNC_WAL;
      case FSYNC_WAL: return Durability.FSYNC_WAL;
      default: return Durability.USE_DEFAULT;
    }
  }

  private static Get get(TGet in) throws IOException {
    Get g = new Get(bytes(in.row));
    if (in.isSetColumns()) {
      for (TColumn c : in.columns) {
        if (c.isSetQualifier()) g.addColumn(bytes(c.family), bytes(c.qualifier));
        else g.addFamily(bytes(c.family));
      }
    }
    if (in.isSetMaxVersions()) g.readVersions(in.maxVersions);
    if (in.isSetFilterBytes()) g.setFilter(filter(in.filterBytes));
    return g;
  }

  private static Put put(TPut in) {
    Put p = in.isSetTimestamp() ? new Put(bytes(in.row), in.timestamp) : new Put(bytes(in.row));
    for (TColumnValue cv : in.columnValues) {
      long ts = cv.isSetTimestamp() ? cv.timestamp : in.isSetTimestamp() ? in.timestamp : HConstants.LATEST_TIMESTAMP;
      p.addColumn(bytes(cv.family), bytes(cv.qualifier), ts, bytes(cv.value));
    }
    if (in.isSetDurability()) p.setDurability(durability(in.durability));
    return p;
  }

  private static Delete delete(TDelete in) {
    Delete d = in.isSetTimestamp() ? new Delete(bytes(in.row), in.timestamp) : new Delete(bytes(in.row));
    if (in.isSetColumns()) {
      for (TColumn c : in.columns) {
        byte[] f = bytes(c.family);
        if (!c.isSetQualifier()) {
          if (c.isSetTimestamp()) d.addFamily(f, c.timestamp); else d.addFamily(f);
          continue;
        }
        byte[] q = bytes(c.qualifier);
        TDeleteType type = in.isSetDeleteType() ? in.deleteType : TDeleteType.DELETE_COLUMNS;
        if (type == TDeleteType.DELETE_COLUMN) {
          if (c.isSetTimestamp()) d.addColumn(f, q, c.timestamp); else d.addColumn(f, q);
        } else {
          if (c.isSetTimestamp()) d.addColumns(f, q, c.timestamp); else d.addColumns(f, q);
        }
      }
    }
    if (in.isSetDurability()) d.setDurability(durability(in.durability));
    return d;
  }

  private static TDelete tdelete(Delete d) {
    TDelete out = new TDelete(ByteBuffer.wrap(d.getRow()));
    return out;
  }

  private static Scan scan(TScan in) throws IOException {
    Scan s = new Scan();
    if (in.isSetStartRow()) s.withStartRow(bytes(in.startRow));
    if (in.isSetStopRow()) s.withStopRow(bytes(in.stopRow));
    if (in.isSetColumns()) {
      for (TColumn c : in.columns) {
        if (c.isSetQualifier()) s.addColumn(bytes(c.family), bytes(c.qualifier));
        else s.addFamily(bytes(c.family));
      }
    }
    if (in.isSetCaching()) s.setCaching(in.caching);
    if (in.isSetMaxVersions()) s.readVersions(in.maxVersions);
    if (in.isSetBatchSize()) s.setBatch(in.batchSize);
    if (in.isSetReversed()) s.setReversed(in.reversed);
    if (in.isSetCacheBlocks()) s.setCacheBlocks(in.cacheBlocks);
    if (in.isSetLimit()) s.setLimit(in.limit);
    if (in.isSetFilterBytes()) s.setFilter(filter(in.filterBytes));
    return s;
  }

  private static ColumnFamilyDescriptor family(TColumnFamilyDescriptor in) {
    ColumnFamilyDescriptorBuilder b = ColumnFamilyDescriptorBuilder.newBuilder(bytes(in.name));
    if (in.isSetAttributes()) in.attributes.forEach((k, v) -> b.setValue(bytes(k), bytes(v)));
    if (in.isSetConfiguration()) in.configuration.forEach(b::setConfiguration);
    if (in.isSetBlockSize()) b.setBlocksize(in.blockSize);
    if (in.isSetBloomnFilterType()) b.setBloomFilterType(BloomType.valueOf(in.bloomnFilterType.name()));
    if (in.isSetCompressionType()) b.setCompressionType(Compression.Algorithm.valueOf(in.compressionType.name()));
    if (in.isSetMaxVersions()) b.setMaxVersions(in.maxVersions);
    if (in.isSetMinVersions()) b.setMinVersions(in.minVersions);
    if (in.isSetTimeToLive()) b.setTimeToLive(in.timeToLive);
    if (in.isSetBlockCacheEnabled()) b.setBlockCacheEnabled(in.blockCacheEnabled);
    if (in.isSetInMemory()) b.setInMemory(in.inMemory);
    return b.build();
  }

  private static TColumnFamilyDescriptor tfamily(ColumnFamilyDescriptor in) {
    TColumnFamilyDescriptor out = new TColumnFamilyDescriptor(ByteBuffer.wrap(in.getName()));
    Map<ByteBuffer, ByteBuffer> attrs = new HashMap<>();
    in.getValues().forEach((k, v) -> attrs.put(ByteBuffer.wrap(k.copyBytes()), ByteBuffer.wrap(v.copyBytes())));
    out.setAttributes(attrs);
    out.setConfiguration(new HashMap<>(in.getConfiguration()));
    out.setBlockSize(in.getBlocksize());
    out.setBloomnFilterType(TBloomFilterType.valueOf(in.getBloomFilterType().name()));
    out.setCompressionType(TCompressionAlgorithm.valueOf(in.getCompressionType().name()));
    out.setMaxVersions(in.getMaxVersions());
    out.setMinVersions(in.getMinVersions());
    out.setTimeToLive(in.getTimeToLive());
    out.setBlockCacheEnabled(in.isBlockCacheEnabled());
    out.setInMemory(in.isInMemory());
    return out;
  }

  // ---- THBaseService ----
  @Override public TResult get(ByteBuffer table, TGet tget) throws TIOError {
    return io(() -> { try (Table t = conn.getTable(tableName(table))) { return result(t.get(get(tget))); } });
  }

  @Override public List<TResult> getMultiple(ByteBuffer table, List<TGet> tgets) throws TIOError {
    return io(() -> {
      List<Get> gets = new ArrayList<>();
      for (TGet g : tgets) gets.add(get(g));
      try (Table t = conn.getTable(tableName(table))) { return results(t.get(gets)); }
    });
  }

  @Override public void put(ByteBuffer table, TPut tput) throws TIOError {
    io(() -> { try (Table t = conn.getTable(tableName(table))) { t.put(put(tput)); return null; } });
  }

  @Override public void putMultiple(ByteBuffer table, List<TPut> tputs) throws TIOError {
    io(() -> {
      List<Put> puts = new ArrayList<>();
      for (TPut p : tputs) puts.add(put(p));
      try (Table t = conn.getTable(tableName(table))) { t.put(puts); return null; }
    });
  }

  // As HBase's own gateway does: a value the client left out checks that the cell is missing;
  // any other, an empty one included, is ifEquals, and HBase's region server matches an empty
  // comparand against a missing cell (logdex's C++ client always sends the field).
  @Override public boolean checkAndPut(ByteBuffer table, ByteBuffer row, ByteBuffer family, ByteBuffer qualifier,
      ByteBuffer value, TPut tput) throws TIOError {
    return io(() -> {
      CheckAndMutate.Builder b = CheckAndMutate.newBuilder(bytes(row));
      CheckAndMutate cam = value == null ? b.ifNotExists(bytes(family), bytes(qualifier)).build(put(tput))
          : b.ifEquals(bytes(family), bytes(qualifier), bytes(value)).build(put(tput));
      try (Table t = conn.getTable(tableName(table))) { return t.checkAndMutate(cam).isSuccess(); }
    });
  }

  @Override public List<TDelete> deleteMultiple(ByteBuffer table, List<TDelete> tdeletes) throws TIOError {
    return io(() -> {
      List<Delete> deletes = new ArrayList<>();
      for (TDelete d : tdeletes) deletes.add(delete(d));
      try (Table t = conn.getTable(tableName(table))) { t.delete(deletes); }
      List<TDelete> left = new ArrayList<>();
      for (Delete d : deletes) left.add(tdelete(d));
      return left;
    });
  }

  @Override public int openScanner(ByteBuffer table, TScan tscan) throws TIOError {
    return io(() -> {
      try (Table t = conn.getTable(tableName(table))) {
        int id = nextScanner.incrementAndGet();
        scanners.put(id, t.getScanner(scan(tscan)));
        return id;
      }
    });
  }

  private ResultScanner scanner(int id) throws TIllegalArgument {
    ResultScanner s = scanners.get(id);
    if (s == null) {
      TIllegalArgument ia = new TIllegalArgument();
      ia.setMessage("Invalid scanner Id");
      throw ia;
    }
    return s;
  }

  @Override public List<TResult> getScannerRows(int scannerId, int numRows) throws TIOError, TIllegalArgument {
    ResultScanner s = scanner(scannerId);
    return io(() -> results(s.next(numRows)));
  }

  @Override public void closeScanner(int scannerId) throws TIOError, TIllegalArgument {
    ResultScanner s = scanners.remove(scannerId);
    if (s == null) scanner(scannerId);
    else s.close();
  }

  @Override public List<TResult> getScannerResults(ByteBuffer table, TScan tscan, int numRows) throws TIOError {
    return io(() -> {
      try (Table t = conn.getTable(tableName(table)); ResultScanner s = t.getScanner(scan(tscan))) {
        return results(s.next(numRows));
      }
    });
  }

  @Override public TTableDescriptor getTableDescriptor(TTableName table) throws TIOError {
    return io(() -> {
      try (Admin admin = conn.getAdmin()) {
        TableDescriptor d = admin.getDescriptor(tableName(table));
        TTableDescriptor out = new TTableDescriptor(table);
        for (ColumnFamilyDescriptor f : d.getColumnFamilies()) out.addToColumns(tfamily(f));
        return out;
      }
    });
  }

  @Override public boolean tableExists(TTableName table) throws TIOError {
    return io(() -> { try (Admin admin = conn.getAdmin()) { return admin.tableExists(tableName(table)); } });
  }

  @Override public void createTable(TTableDescriptor desc, List<ByteBuffer> splitKeys) throws TIOError {
    io(() -> {
      TableDescriptorBuilder b = TableDescriptorBuilder.newBuilder(tableName(desc.tableName));
      if (desc.isSetColumns()) for (TColumnFamilyDescriptor f : desc.columns) b.setColumnFamily(family(f));
      if (desc.isSetAttributes()) desc.attributes.forEach((k, v) -> b.setValue(bytes(k), bytes(v)));
      if (desc.isSetDurability()) b.setDurability(durability(desc.durability));
      try (Admin admin = conn.getAdmin()) {
        if (splitKeys != null && !splitKeys.isEmpty()) {
          byte[][] splits = new byte[splitKeys.size()][];
          for (int i = 0; i < splits.length; ++i) splits[i] = bytes(splitKeys.get(i));
          admin.createTable(b.build(), splits);
        } else {
          admin.createTable(b.build());
        }
      }
      return null;
    });
  }

  @Override public void deleteTable(TTableName table) throws TIOError {
    io(() -> { try (Admin admin = conn.getAdmin()) { admin.deleteTable(tableName(table)); return null; } });
  }

  @Override public void disableTable(TTableName table) throws TIOError {
    io(() -> { try (Admin admin = conn.getAdmin()) { admin.disableTable(tableName(table)); return null; } });
  }

  @Override public void modifyColumnFamily(TTableName table, TColumnFamilyDescriptor column) throws TIOError {
    io(() -> { try (Admin admin = conn.getAdmin()) { admin.modifyColumnFamily(tableName(table), family(column)); return null; } });
  }

  @Override public void createNamespace(TNamespaceDescriptor ns) throws TIOError {
    io(() -> {
      NamespaceDescriptor.Builder b = NamespaceDescriptor.create(ns.name);
      if (ns.isSetConfiguration()) ns.configuration.forEach(b::addConfiguration);
      try (Admin admin = conn.getAdmin()) { admin.createNamespace(b.build()); return null; }
    });
  }

  @Override public void deleteNamespace(String name) throws TIOError {
    io(() -> { try (Admin admin = conn.getAdmin()) { admin.deleteNamespace(name); return null; } });
  }

  @Override public TNamespaceDescriptor getNamespaceDescriptor(String name) throws TIOError {
    return io(() -> {
      try (Admin admin = conn.getAdmin()) {
        NamespaceDescriptor d = admin.getNamespaceDescriptor(name);
        TNamespaceDescriptor out = new TNamespaceDescriptor(d.getName());
        out.setConfiguration(new HashMap<>(d.getConfiguration()));
        return out;
      }
    });
  }

  @Override public List<String> listNamespaces() throws TIOError {
    return io(() -> {
      try (Admin admin = conn.getAdmin()) {
        List<String> out = new ArrayList<>();
        for (NamespaceDescriptor d : admin.listNamespaceDescriptors()) out.add(d.getName());
        return out;
      }
    });
  }
}
