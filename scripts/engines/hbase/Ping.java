// One real request to a running HBase: connects through ZooKeeper (the hbase-site.xml of the
// directory given), lists the tables and prints the cluster's version. Exit 0 on success.
// Run with the JDK's source launcher: java -cp 'LIBS/*' Ping.java SITE_XML
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;

public class Ping {
  public static void main(String[] args) throws Exception {
    Configuration conf = HBaseConfiguration.create();
    conf.addResource(new Path(args[0]));
    conf.setInt("hbase.client.retries.number", 2);
    conf.setInt("hbase.client.operation.timeout", 10000);
    try (Connection c = ConnectionFactory.createConnection(conf); Admin admin = c.getAdmin()) {
      int tables = admin.listTableNames().length;
      System.out.println("hbase " + admin.getClusterMetrics().getHBaseVersion() + " tables " + tables);
    }
  }
}
